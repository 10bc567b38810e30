"""The cross_entropy check against the float64 oracle, without pytest (conformance cases,
vendor path tests and ``liger check``)."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close, loosest
from liger_core.conformance._loss_util import assert_unchanged, clones, gen, labels, upstream
from liger_core.ops import cross_entropy as contract


def make_inputs(n, vocab, dtype, device, seed=0, ignore_index=-100, ignored=0.25, weighted=False, scale=3.0):
    """logits (n, vocab) of spread ``scale``, targets with some ignored rows, optional class weights."""
    g = gen(seed)
    logits = (torch.randn(n, vocab, generator=g) * scale).to(dtype)
    target = labels(n, vocab, seed, ignore_index, ignored)
    weight = (torch.rand(vocab, generator=g) + 0.5).to(dtype) if weighted else None
    move = lambda t: None if t is None else t.to(device)  # noqa: E731
    return move(logits), move(target), move(weight)


def check_cross_entropy(
    backend,
    logits,
    target,
    weight=None,
    ignore_index=-100,
    lse_square_scale=0.0,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    return_z_loss=False,
    grad_scalar=1.0,
    seed=0,
    in_place=False,
):
    """Run ``backend``'s cross_entropy forward and backward; check loss, z-loss and grad_logits.
    With ``in_place`` the op gets a private copy of ``logits`` that it may overwrite with the
    gradient, so only target and weight must come back unchanged; without, logits must too."""
    before = clones(logits, target, weight)
    x_in = logits.clone().requires_grad_()
    out = backend.ops["cross_entropy"](
        x_in,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        in_place,
    )
    loss, z = out if return_z_loss else (out, None)
    dy_dev = upstream(loss.shape, seed, grad_scalar).to(loss.device, loss.dtype)
    dy = dy_dev.cpu().double()  # the oracle gets the gradient exactly as the kernel saw it
    loss.backward(dy_dev)

    x64 = logits.detach().cpu().double().requires_grad_()
    w64 = weight.detach().cpu().double() if weight is not None else None
    loss64, z64 = contract.math(
        x64, target.cpu(), w64, ignore_index, lse_square_scale, label_smoothing, reduction, softcap
    )
    loss64.backward(dy)

    tol = loosest(logits.dtype, weight.dtype if weight is not None else None)
    assert loss.dtype == logits.dtype and loss.device == logits.device, "cross_entropy: loss dtype/device"
    assert_close(loss, loss64, tol, "cross_entropy loss")
    if return_z_loss:
        assert z.dtype == logits.dtype
        assert_close(
            z, z64, tol, "cross_entropy z_loss", scale=float(loss64.detach().abs().max()) if loss64.numel() else None
        )
    assert x_in.grad is not None and x_in.grad.dtype == logits.dtype, (
        "cross_entropy: grad_logits missing or wrong dtype"
    )
    assert torch.isfinite(x_in.grad.float()).all(), "cross_entropy: non-finite grad_logits"
    assert_close(x_in.grad, x64.grad, tol, "cross_entropy grad_logits")
    # In place, x_in's memory may now hold the gradient: nothing to compare it with.
    unchanged = {} if in_place else {"logits": (x_in, before[0])}
    assert_unchanged("cross_entropy", **unchanged, target=(target, before[1]), weight=(weight, before[2]))
    return loss, x_in.grad
