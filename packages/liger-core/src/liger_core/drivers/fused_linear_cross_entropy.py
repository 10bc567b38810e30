"""fused_linear_cross_entropy's driver (`liger_core.ops.fused_linear_cross_entropy`): the autograd
Function over a vendor's kernels.

The chunked pass itself (how many tokens per chunk under the memory budget, which GEMMs, a
vocabulary-major path, where the gradient is accumulated and in which dtype) is each vendor's
hardware strategy, so the protocol's unit is the whole pass: the vendor's ``forward`` returns the
loss and, when asked, every gradient; its ``backward`` recomputes the chunks for a per-row
incoming gradient. The driver owns the rest, shared by the three vendors:

* the arguments are checked once; the targets and class weights are contiguous;
* which gradients are wanted (bias's only when there is a bias), from ``ctx.needs_input_grad``;
* a scalar loss ("mean", "sum") gets its gradients in the forward, for an incoming gradient of
  1, kept off the saved tensors (`take_fused_grads`: autograd adopts them as ``.grad`` without a
  copy) and scaled by the vendor in the backward; "none" has one incoming gradient per row,
  which must weight the rows before grad_weight's sum over them, so its backward recomputes;
* the z-loss is non-differentiable and unused outputs get no materialised gradient (CUDA's
  policy; the other two vendors materialised zeros for it);
* the forward computes no gradient when none is wanted (CUDA's and Intel's policy; Ascend's
  computed them for every scalar loss).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.drivers.cross_entropy import loss_outputs
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops._losses import take_fused_grads
from liger_core.ops.fused_linear_cross_entropy import check_args

PROTOCOL = 1

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


class FusedLinearCrossEntropyKernels(Protocol):
    """What a vendor provides. ``needs`` is (input, weight, bias): which gradients are wanted
    (bias's False when there is no bias); a gradient not wanted may be None or anything (the
    driver returns None for it). Gradients come in the dtypes of their inputs."""

    protocol: int

    def forward(
        self,
        input: torch.Tensor,
        weight: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None,
        ce_weight: torch.Tensor | None,
        ignore_index: int,
        lse_square_scale: float,
        label_smoothing: float,
        reduction: str,
        softcap: float | None,
        return_z_loss: bool,
        accum_dtype: torch.dtype | None,
        needs: tuple[bool, bool, bool],
        grads_now: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, Grads | None, tuple[torch.Tensor | None, ...], Any]:
        """``(loss, z_loss, grads, saved, state)``. The arguments are checked; ``target`` and
        ``ce_weight`` are contiguous; ``input`` and ``weight`` are the caller's (the vendor lays
        them out and casts them for its GEMMs). ``loss`` a scalar, or per row for "none";
        ``z_loss`` likewise when ``return_z_loss`` (else anything, ignored). With
        ``grads_now`` (a scalar loss, some gradient wanted): ``grads`` = (input, weight, bias)
        gradients for an incoming gradient of 1, each a buffer of the vendor's own (dtype its
        choice: `scale_grads` returns the final ones), ``state`` what `scale_grads` needs and
        ``saved`` ignored. Without it: ``grads`` ignored; when a gradient is wanted (reduction
        "none"), ``saved`` (tensors or None, saved by the driver) and ``state`` (kept as is) are
        what `backward` needs."""

    def scale_grads(self, grads: Grads, grad_loss: torch.Tensor, state: Any) -> Grads:
        """``grads`` and ``state`` from `forward`: the gradients times the scalar incoming
        gradient ``grad_loss`` (float32, contiguous), in the inputs' dtypes; in place where the
        vendor can (autograd adopts them), no host synchronisation. None stays None."""

    def backward(
        self,
        grad_loss: torch.Tensor,
        saved: tuple[torch.Tensor | None, ...],
        state: Any,
        needs: tuple[bool, bool, bool],
    ) -> Grads:
        """The gradients for the per-row incoming ``grad_loss`` (float32, contiguous, one per
        token) of reduction "none", recomputing the chunks from ``saved`` and ``state``."""


def autograd_function(kernels: FusedLinearCrossEntropyKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedLinearCrossEntropyFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "fused_linear_cross_entropy", PROTOCOL)

    def forward(
        ctx, input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction,
        softcap, return_z_loss, accum_dtype,
    ):  # fmt: skip
        check_args(
            input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction,
            softcap, return_z_loss, accum_dtype,
        )  # fmt: skip
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[3])
        defer = any(needs) and reduction == "none"
        loss, z, grads, saved, state = kernels.forward(
            input, weight, target.contiguous(), bias, None if ce_weight is None else ce_weight.contiguous(),
            ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss, accum_dtype,
            needs, any(needs) and not defer,
        )  # fmt: skip
        ctx.needs, ctx.defer, ctx.state = needs, defer, state
        if defer:
            ctx.save_for_backward(*saved)
        else:
            # Not saved tensors: see `take_fused_grads`.
            ctx.fused_grads = grads if any(needs) else (None, None, None)
        return loss_outputs(ctx, loss, z, return_z_loss)

    def backward(ctx, grad_loss, grad_z=None):
        nones = (None,) * 8  # target and the options after bias
        if grad_loss is None:
            return (None, None, None, None) + nones
        need_x, need_w, need_b = ctx.needs
        up = grad_loss.float().contiguous()
        if ctx.defer:
            gx, gw, gb = kernels.backward(up, ctx.saved_tensors, ctx.state, ctx.needs)
        else:
            gx, gw, gb = kernels.scale_grads(take_fused_grads(ctx), up, ctx.state)  # in place: autograd adopts them
        return (gx if need_x else None, gw if need_w else None, None, gb if need_b else None) + nones

    return build_function("LigerFusedLinearCrossEntropyFunction", module, forward, backward)
