"""vocab_parallel_cross_entropy's driver (`liger_core.ops.vocab_parallel_cross_entropy`): the
autograd Function over a vendor's kernels.

The driver checks the arguments once, lays out this rank's shard of the logits as the vendor's
kernels read them, applies the in-place policy (as cross_entropy's: ``in_place=True`` writes the
gradient over contiguous logits) and saves what the vendor's backward needs. The forward (the
shard's lse, the ranks combined by `combine_shards`, the loss and its reduction: on the device or
on the host) and the backward (no communication) are the vendor's. The three vendors' policies
were the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers.cross_entropy import logits_grad
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.vocab_parallel_cross_entropy import check_args

PROTOCOL = 1


class VocabParallelCrossEntropyKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def rows(self, logits: torch.Tensor) -> torch.Tensor:
        """This rank's (rows, shard) logits as the kernels read them: ``logits`` itself when its
        layout suits them (unit column stride at least), else a contiguous copy. The backward's
        in-place gradient lands in this tensor."""

    def forward(
        self, x: torch.Tensor, target: torch.Tensor, group: Any, ignore_index: int, reduction: str
    ) -> tuple[torch.Tensor, tuple[torch.Tensor | None, ...], Any]:
        """``(loss, saved, state)``. ``x`` from `rows`; ``target`` contiguous (full-vocabulary
        class indices); the arguments are checked. ``loss`` in the logits' dtype (scalar, or per
        row for "none"); ``saved``: tensors the backward needs besides ``x`` (saved by the
        driver); ``state``: anything else, kept as is. The logits are not written."""

    def backward(
        self,
        grad_loss: torch.Tensor,
        x: torch.Tensor,
        saved: tuple[torch.Tensor | None, ...],
        state: Any,
        out: torch.Tensor | None,
    ) -> torch.Tensor:
        """The shard's gradient for the incoming ``grad_loss`` (contiguous, the loss's shape and
        dtype), without communication. Written into ``out`` when given (``x`` itself, contiguous;
        each element read before it is written) and returned; else a new contiguous tensor."""


def autograd_function(kernels: VocabParallelCrossEntropyKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerVocabParallelCrossEntropyFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "vocab_parallel_cross_entropy", PROTOCOL)

    def forward(ctx, logits, target, group, ignore_index, reduction, in_place):
        check_args(logits, target, group, ignore_index, reduction, in_place)
        x = kernels.rows(logits)
        loss, saved, state = kernels.forward(x, target.contiguous(), group, ignore_index, reduction)
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own.
        ctx.save_for_backward(x.detach() if in_place else x, *saved)
        ctx.state, ctx.in_place = state, in_place
        ctx.set_materialize_grads(False)
        return loss

    def backward(ctx, grad_loss):
        if grad_loss is None:
            return (None,) * 6
        return (logits_grad(kernels, ctx, grad_loss),) + (None,) * 5

    return build_function("LigerVocabParallelCrossEntropyFunction", module, forward, backward)
