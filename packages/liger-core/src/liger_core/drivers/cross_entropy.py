"""cross_entropy's driver (`liger_core.ops.cross_entropy`): the autograd Function over a vendor's kernels.

The driver checks the arguments once, lays the logits out as the vendor's kernels read them,
applies the in-place policy (``in_place=True``, the caller's opt-in: the backward writes the
gradient over the logits when they are contiguous; strided logits were copied in the forward, so
the gradient lands in that copy), saves what the vendor's backward needs and returns the z-loss
as a non-differentiable output. How the loss is computed and reduced (on the device or on the
host, with which scales) is the vendor's: its forward returns what its backward needs as saved
tensors and an opaque state.

The three vendors' policies were the same except two, where the CUDA one is kept: grads are not
materialised (an unused output gets None, not a zero tensor: no zero-filled buffer), and the
class weights are made contiguous once here.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.cross_entropy import check_args

PROTOCOL = 1


class CrossEntropyKernels(Protocol):
    """What a vendor provides."""

    protocol: int

    def rows(self, logits: torch.Tensor) -> torch.Tensor:
        """The (rows, vocab) logits as the kernels read them: ``logits`` itself when its layout
        suits them (unit column stride at least), else a contiguous copy. The backward's in-place
        gradient lands in this tensor."""

    def forward(
        self,
        x: torch.Tensor,
        target: torch.Tensor,
        weight: torch.Tensor | None,
        ignore_index: int,
        lse_square_scale: float,
        label_smoothing: float,
        reduction: str,
        softcap: float | None,
        return_z_loss: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, tuple[torch.Tensor | None, ...], Any]:
        """``(loss, z_loss, saved, state)``. ``x`` comes from `rows`; ``target`` and ``weight``
        are contiguous; the arguments are checked. ``loss`` in the logits' dtype (a scalar, or
        per row for reduction "none"); ``z_loss`` likewise when ``return_z_loss`` (else anything,
        ignored); ``saved``: tensors (or None) the backward needs besides ``x``, saved by the
        driver; ``state``: anything else the backward needs, kept as is. The logits are not
        written."""

    def backward(
        self,
        grad_loss: torch.Tensor,
        x: torch.Tensor,
        saved: tuple[torch.Tensor | None, ...],
        state: Any,
        out: torch.Tensor | None,
    ) -> torch.Tensor:
        """The logits' gradient for the incoming ``grad_loss`` (contiguous, the loss's shape and
        dtype). ``x``, ``saved`` and ``state`` as the forward returned them. Written into ``out``
        when given (it is ``x`` itself, contiguous: the in-place policy; each element is read
        before it is written) and returned; else a new contiguous tensor of ``x``'s dtype."""


def logits_grad(kernels: CrossEntropyKernels, ctx: Any, grad_loss: torch.Tensor) -> torch.Tensor:
    """The logits' gradient from ``kernels.backward`` over what the forward saved (the rows first),
    written over the logits under the in-place policy (``ctx.in_place`` and contiguous rows). Shared
    with vocab_parallel_cross_entropy's driver, whose kernels have the same ``backward``."""
    x, *saved = ctx.saved_tensors
    out = x if ctx.in_place and x.is_contiguous() else None
    grad = kernels.backward(grad_loss.contiguous(), x, tuple(saved), ctx.state, out)
    if out is not None:
        # The kernel overwrote the logits behind autograd's back: bump their version, so a node
        # that also saved them (a misuse of in_place) raises instead of reading a gradient.
        torch.autograd.graph.increment_version(x)
    return grad


def loss_outputs(ctx: Any, loss: torch.Tensor, z: torch.Tensor, return_z_loss: bool):
    """What a cross-entropy Function's forward returns: the loss, and with ``return_z_loss`` the
    z-loss too (for logging: non-differentiable). Unused gradients stay None in backward."""
    ctx.set_materialize_grads(False)
    if not return_z_loss:
        return loss
    ctx.mark_non_differentiable(z)
    return loss, z


def autograd_function(kernels: CrossEntropyKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerCrossEntropyFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "cross_entropy", PROTOCOL)

    def forward(
        ctx, logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
        return_z_loss, in_place,
    ):  # fmt: skip
        check_args(
            logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
            return_z_loss, in_place,
        )  # fmt: skip
        x = kernels.rows(logits)
        target = target.contiguous()
        weight = None if weight is None else weight.contiguous()
        loss, z, saved, state = kernels.forward(
            x, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss
        )
        # In place: a detached alias, so the gradient returned in its memory is a tensor of its own
        # (never the input itself) that autograd can keep as .grad without a copy.
        ctx.save_for_backward(x.detach() if in_place else x, *saved)
        ctx.state, ctx.in_place = state, in_place
        return loss_outputs(ctx, loss, z, return_z_loss)

    def backward(ctx, grad_loss, grad_z=None):
        if grad_loss is None:
            return (None,) * 10
        return (logits_grad(kernels, ctx, grad_loss),) + (None,) * 9

    return build_function("LigerCrossEntropyFunction", module, forward, backward)
