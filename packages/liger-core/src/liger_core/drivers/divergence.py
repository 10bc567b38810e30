"""The divergences' drivers (`liger_core.ops.kl_div`, ``jsd``, ``tvd`` and ``fused_ce_tvd``): their
autograd Functions over a vendor's kernels.

kl_div, jsd, tvd (`DivergenceKernels`): the forward computes the loss and, when the first input
needs a gradient, that gradient for an incoming gradient of 1 (scaled by the reduction) in the same
pass; backward only scales it by the incoming gradient (`DivergenceKernels.scale_grad`, on the
driver's own buffer). The reduction's scale of jsd and tvd (``1 / counted rows``) is a device
scalar: the driver never reads the count on the host. Reduction "none": kl_div saves ``y_true``
and forms ``-p * grad_output`` in backward (its gradient does not depend on ``y_pred``: no buffer
between forward and backward); tvd keeps its ``0.5 * sign(p - q)`` gradient and multiplies it.

fused_ce_tvd (`FusedCETVDKernels`): the forward keeps per-row float32 scalars (both lse and
``sigma = sum p sign(p - q)``), the backward recomputes the student's gradient from them and the
logits: ``grad_ce (p - [v == y]) + grad_tvd 0.5 p (sign(p - q) - sigma)``.

Where the vendors differed, the policy kept: NVIDIA's (the count on the device, reduction "none" of
kl_div without a gradient buffer, target checks a vendor may defer until after its launch). A vendor
whose kl_div, jsd and tvd recompute the gradient in backward instead keeps its own driver for those
three (Intel's: see its module) and uses `fused_ce_tvd_function` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops import fused_ce_tvd, jsd, kl_div, tvd
from liger_core.ops._losses import autograd_function as build_function

PROTOCOL = 1


class DivergenceKernels(Protocol):
    """What a vendor provides for kl_div, jsd and tvd. ``x``/``y`` (and ``p``/``q``) are 2-D
    ``(rows, vocab)`` with unit column stride; ``labels`` contiguous ``(rows,)`` or None. Each
    returns ``(loss, grad)``: ``loss`` the float32 per-element loss when ``elementwise``, else the
    float32 0-dim sum of the counted elements (not scaled); ``grad`` ``scale * d(sum)/dx`` in x's
    dtype, a new contiguous tensor when ``want_grad``, else None (rows labelled ``ignore_index``:
    no loss, zero gradient)."""

    protocol: int

    def kl_div(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        elementwise: bool,
        log_target: bool,
        eps: float,
        scale: float,
        want_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``t (log max(t, eps) - x)`` (log_target: ``e^t (t - x)``); ``want_grad`` only without ``elementwise``."""

    def jsd(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        labels: torch.Tensor | None,
        beta: float,
        ignore_index: int,
        scale: torch.Tensor,
        want_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The generalised JSD of the student's log-probabilities ``x`` against ``y``; ``scale`` a
        float32 ``(1,)`` device tensor. Never elementwise."""

    def tvd(
        self,
        p: torch.Tensor,
        q: torch.Tensor,
        labels: torch.Tensor | None,
        elementwise: bool,
        ignore_index: int,
        scale: torch.Tensor,
        want_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``|p - q| / 2``; ``scale`` a float32 ``(1,)`` device tensor."""

    def scale_grad(self, grad: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
        """``grad`` (from the forward; the driver's own, may be scaled in place) times the float32
        ``(1,)`` incoming gradient, in grad's dtype."""


class FusedCETVDKernels(Protocol):
    """What a vendor provides for fused_ce_tvd. ``s``/``t`` (student, teacher logits) are 2-D
    ``(rows, vocab)`` with unit column stride; the target as `fused_ce_tvd_target` returns it."""

    protocol: int

    def fused_ce_tvd_target(
        self, target: torch.Tensor, ignore_index: int, n_classes: int
    ) -> tuple[torch.Tensor, Callable[[], None]]:
        """The contiguous ``(rows,)`` target as the kernels read it, and a check the driver calls
        after `fused_ce_tvd_forward` that raises liger-core's ValueError for a target out of
        ``[0, n_classes)`` other than ``ignore_index`` (a vendor may check at once instead)."""

    def fused_ce_tvd_forward(
        self, s: torch.Tensor, t: torch.Tensor, target: torch.Tensor, ignore_index: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(ce, tvd, s_lse, t_lse, sigma)``, float32 per row (0 on ignored rows)."""

    def fused_ce_tvd_backward(
        self,
        s: torch.Tensor,
        t: torch.Tensor,
        target: torch.Tensor,
        s_lse: torch.Tensor,
        t_lse: torch.Tensor,
        sigma: torch.Tensor,
        up_ce: torch.Tensor | None,
        up_tvd: torch.Tensor | None,
        ignore_index: int,
    ) -> torch.Tensor:
        """d(loss)/d(student logits), a new contiguous tensor in s's dtype; ``up_ce`` / ``up_tvd``
        the contiguous float32 per-row incoming gradients (None: that output feeds nothing)."""


def inverse_count(
    labels: torch.Tensor | None, ignore_index: int, n_rows: int, device: torch.device, per_row: int = 1
) -> torch.Tensor:
    """``1 / (counted rows * per_row)`` as a 1-element float32 device tensor (1 when none count):
    the rows are counted on the device, never read on the host."""
    if labels is None:
        return torch.full((1,), 1.0 / max(n_rows * per_row, 1), dtype=torch.float32, device=device)
    n = (labels != ignore_index).sum(dtype=torch.float32).reshape(1) * per_row
    return 1.0 / torch.clamp_min(n, 1.0)


def _unit_cols(x: torch.Tensor) -> torch.Tensor:
    """``x`` with unit column stride (a copy only when needed)."""
    return x if x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()


def autograd_functions(kernels: DivergenceKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """``LigerKLDivFunction``, ``LigerJSDFunction`` and ``LigerTVDFunction`` over ``kernels``, by op
    name, defined in the vendor's ``module``."""
    check_protocol(kernels, "divergence", PROTOCOL)

    def backward(ctx, grad_output):
        (saved,) = ctx.saved_tensors
        if saved is None:
            return None, None, None, None, None
        if ctx.elementwise == "kl_div":  # saved: y_true
            p = saved.float().exp() if ctx.log_target else saved.float()
            return -(p * grad_output).to(ctx.grad_dtype), None, None, None, None
        if ctx.elementwise == "tvd":  # saved: the gradient for an incoming gradient of 1
            return (saved.float() * grad_output).to(saved.dtype), None, None, None, None
        return kernels.scale_grad(saved, grad_output.float().reshape(1)), None, None, None, None

    def kl_div_forward(ctx, y_pred, y_true, reduction, log_target, eps):
        kl_div.check_args(y_pred, y_true, reduction, log_target, eps)
        x, t = _unit_cols(y_pred), _unit_cols(y_true)
        n, v = x.shape
        elementwise = reduction == "none"
        scale = {"batchmean": 1.0 / max(n, 1), "mean": 1.0 / max(n * v, 1)}.get(reduction, 1.0)
        want_grad = ctx.needs_input_grad[0] and not elementwise
        loss, grad = kernels.kl_div(x, t, elementwise, log_target, eps, scale, want_grad)
        ctx.elementwise = "kl_div" if elementwise else None
        ctx.log_target, ctx.grad_dtype = log_target, y_pred.dtype
        if elementwise:
            ctx.save_for_backward(t if ctx.needs_input_grad[0] else None)
            return loss
        ctx.save_for_backward(grad)
        return loss * scale

    def jsd_forward(ctx, student_logp, teacher_logp, shift_labels, beta, ignore_index):
        jsd.check_args(student_logp, teacher_logp, shift_labels, beta, ignore_index)
        x, y = _unit_cols(student_logp), _unit_cols(teacher_logp)
        labels = _contiguous(shift_labels)
        inv_n = inverse_count(labels, ignore_index, x.shape[0], x.device)
        total, grad = kernels.jsd(x, y, labels, beta, ignore_index, inv_n, ctx.needs_input_grad[0])
        ctx.elementwise = None
        ctx.save_for_backward(grad)
        return (total * inv_n[0]).to(student_logp.dtype)

    def tvd_forward(ctx, p, q, shift_labels, reduction, ignore_index):
        tvd.check_args(p, q, shift_labels, reduction, ignore_index)
        p_, q_ = _unit_cols(p), _unit_cols(q)
        n, v = p_.shape
        labels = _contiguous(shift_labels)
        if reduction == "batchmean":
            scale = inverse_count(labels, ignore_index, n, p_.device)
        elif reduction == "mean":
            scale = inverse_count(labels, ignore_index, n, p_.device, per_row=v)
        else:
            scale = torch.ones(1, dtype=torch.float32, device=p_.device)
        elementwise = reduction == "none"
        loss, grad = kernels.tvd(p_, q_, labels, elementwise, ignore_index, scale, ctx.needs_input_grad[0])
        ctx.elementwise = "tvd" if elementwise else None
        ctx.save_for_backward(grad)
        return loss if elementwise else loss * scale[0]

    return {
        "kl_div": build_function("LigerKLDivFunction", module, kl_div_forward, backward),
        "jsd": build_function("LigerJSDFunction", module, jsd_forward, backward),
        "tvd": build_function("LigerTVDFunction", module, tvd_forward, backward),
    }


def fused_ce_tvd_function(kernels: FusedCETVDKernels, module: str) -> type[torch.autograd.Function]:
    """``LigerFusedCETVDFunction`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "divergence", PROTOCOL)

    def forward(ctx, student_logits, teacher_logits, target, ignore_index):
        fused_ce_tvd.check_args(student_logits, teacher_logits, target, ignore_index)
        s, t = _unit_cols(student_logits), _unit_cols(teacher_logits)
        target, check_target = kernels.fused_ce_tvd_target(target.contiguous(), ignore_index, s.shape[1])
        ce, tvd_, s_lse, t_lse, sigma = kernels.fused_ce_tvd_forward(s, t, target, ignore_index)
        check_target()
        ctx.set_materialize_grads(False)
        ctx.ignore_index = ignore_index
        ctx.save_for_backward(s, t, target, s_lse, t_lse, sigma)
        return ce, tvd_

    def backward(ctx, grad_ce, grad_tvd):
        if (grad_ce is None and grad_tvd is None) or not ctx.needs_input_grad[0]:
            return None, None, None, None
        s, t, target, s_lse, t_lse, sigma = ctx.saved_tensors
        up_ce, up_tvd = (None if g is None else g.float().contiguous() for g in (grad_ce, grad_tvd))
        grad = kernels.fused_ce_tvd_backward(s, t, target, s_lse, t_lse, sigma, up_ce, up_tvd, ctx.ignore_index)
        return grad, None, None, None

    return build_function("LigerFusedCETVDFunction", module, forward, backward)
