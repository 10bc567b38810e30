"""The softmax check against the float64 oracle, without pytest: used by the conformance cases,
by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close
from liger_core.ops import softmax as contract


def make_inputs(shape, dtype, device, seed=0):
    """``(x, dy)``: logits spread wide enough that rows are peaked."""
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen) * 3 + 1).to(dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    return x.to(device), dy.to(device)


def check_softmax(backend, x, dy) -> None:
    """Run ``backend``'s softmax forward and backward; check output and grad_x."""
    x_in = x.clone().requires_grad_()
    dy_in = dy.clone()
    y = backend.ops["softmax"](x_in)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    y64 = contract.math(x64)
    y64.backward(dy.cpu().double())

    assert y.dtype == x.dtype and y.device == x.device, "softmax output dtype/device"
    assert_close(y, y64, x.dtype, "softmax output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype, "softmax grad_x missing or wrong dtype"
    # grad_x = y * (dy - sum(dy * y)): the sum cancels; measure against max(y * |dy|) scale.
    with torch.no_grad():
        scale = float((y64.detach() * dy.cpu().double().abs()).abs().max()) if x.numel() else 1.0
    assert_close(x_in.grad, x64.grad, x.dtype, "softmax grad_x", scale=scale)
    assert torch.equal(x_in.detach(), x), "softmax modified its input"
    assert torch.equal(dy_in, dy), "softmax modified the incoming gradient"
