"""The fused_linear_cross_entropy check against the float64 oracle, without pytest."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, grad_scale_through, labels, upstream
from liger_core.ops import cross_entropy as ce_contract


def make_inputs(n, hidden, vocab, dtype, device, seed=0, ignore_index=-100, ignored=0.25, bias=False, ce_weight=False):
    """input (n, hidden), lm_head weight (vocab, hidden) giving O(3) logits, targets, optional bias/ce_weight."""
    g = gen(seed)
    x = torch.randn(n, hidden, generator=g).to(dtype)
    w = (torch.randn(vocab, hidden, generator=g) * (3.0 / max(hidden, 1) ** 0.5)).to(dtype)
    target = labels(n, vocab, seed, ignore_index, ignored)
    b = (torch.randn(vocab, generator=g) * 0.5).to(dtype) if bias else None
    cw = (torch.rand(vocab, generator=g) + 0.5).to(dtype) if ce_weight else None
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(x), move(w), move(target), move(b), move(cw)


def check_fused_linear_cross_entropy(
    backend,
    x,
    w,
    target,
    bias=None,
    ce_weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    accum_dtype=None,
    grad_scalar=1.0,
    seed=0,
    input_grad=True,
):
    """Forward and backward against the float64 oracle: loss, z-loss, grad_input, grad_weight, grad_bias."""
    before = clones(x, w, target, bias, ce_weight)
    x_in = x.clone().requires_grad_(input_grad)
    w_in = w.clone().requires_grad_()
    b_in = bias.clone().requires_grad_() if bias is not None else None
    out = backend.ops["fused_linear_cross_entropy"](
        x_in,
        w_in,
        target,
        b_in,
        ce_weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        accum_dtype,
    )
    loss, z = out if return_z_loss else (out, None)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    dy = dy_dev.cpu().double()
    loss.backward(dy_dev)

    x64 = x.detach().cpu().double().requires_grad_()
    w64 = w.detach().cpu().double().requires_grad_()
    b64 = bias.detach().cpu().double().requires_grad_() if bias is not None else None
    logits64 = x64 @ w64.t()
    if b64 is not None:
        logits64 = logits64 + b64
    logits64.retain_grad()
    cw64 = ce_weight.detach().cpu().double() if ce_weight is not None else None
    loss64, z64 = ce_contract.math(
        logits64, target.cpu(), cw64, ignore_index, lse_square_scale, label_smoothing, reduction, softcap
    )
    loss64.backward(dy)

    tol = loosest(x.dtype, w.dtype)
    assert loss.dtype == torch.float32 and loss.device == x.device, "fused_linear_cross_entropy: loss dtype/device"
    assert_close(loss, loss64, tol, "fused_linear_cross_entropy loss")
    if return_z_loss:
        assert z.dtype == torch.float32
        scale = float(loss64.detach().abs().max()) if loss64.numel() else None
        assert_close(z, z64, tol, "fused_linear_cross_entropy z_loss", scale=scale)
    g = logits64.grad
    if input_grad:
        assert x_in.grad is not None and x_in.grad.dtype == x.dtype, "fused_linear_cross_entropy: grad_input"
        assert_close(
            x_in.grad, x64.grad, tol, "fused_linear_cross_entropy grad_input", scale=grad_scale_through(g, w64.detach())
        )
    else:
        assert x_in.grad is None
    assert w_in.grad is not None and w_in.grad.dtype == w.dtype, "fused_linear_cross_entropy: grad_weight"
    assert_close(
        w_in.grad,
        w64.grad,
        tol,
        "fused_linear_cross_entropy grad_weight",
        scale=grad_scale_through(g.t(), x64.detach()),
    )
    if bias is not None:
        assert b_in.grad is not None and b_in.grad.dtype == bias.dtype, "fused_linear_cross_entropy: grad_bias"
        bscale = float(g.abs().sum(0).max()) if g.numel() else 1.0
        assert_close(b_in.grad, b64.grad, tol, "fused_linear_cross_entropy grad_bias", scale=bscale)
    assert_unchanged(
        "fused_linear_cross_entropy",
        input=(x_in, before[0]),
        weight=(w_in, before[1]),
        target=(target, before[2]),
        bias=(b_in, before[3]),
        ce_weight=(ce_weight, before[4]),
    )
