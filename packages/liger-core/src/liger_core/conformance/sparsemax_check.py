"""The sparsemax check against the float64 oracle, without pytest: used by the conformance cases,
by vendor tests that force their own code paths, and by ``liger check``."""

from __future__ import annotations

import torch

from liger_core.conformance import assert_close
from liger_core.ops import sparsemax as contract


def make_inputs(shape, dtype, device, seed=0):
    """``(x, dy)``: spread so that supports range from one entry to many."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.rand(shape[:-1] + (1,), generator=gen) * 2 + 0.05 if len(shape) else torch.tensor(1.0)
    x = (torch.randn(shape, generator=gen) * scale).to(dtype)
    dy = torch.randn(shape, generator=gen).to(dtype)
    return x.to(device), dy.to(device)


def check_sparsemax(backend, x, dy, dim: int = -1) -> None:
    """Run ``backend``'s sparsemax forward and backward; check output and grad_x."""
    x_in = x.clone().requires_grad_()
    dy_in = dy.clone()
    y = backend.ops["sparsemax"](x_in, dim)
    y.backward(dy_in)

    x64 = x.detach().cpu().double().requires_grad_()
    y64 = contract.math(x64, dim)
    y64.backward(dy.cpu().double())

    assert y.dtype == x.dtype and y.device == x.device, "sparsemax output dtype/device"
    assert_close(y, y64, x.dtype, "sparsemax output")
    assert x_in.grad is not None and x_in.grad.dtype == x.dtype, "sparsemax grad_x missing or wrong dtype"
    assert_close(x_in.grad, x64.grad, x.dtype, "sparsemax grad_x", scale=float(dy.abs().max()) if x.numel() else 1)
    assert torch.equal(x_in.detach(), x), "sparsemax modified its input"
    assert torch.equal(dy_in, dy), "sparsemax modified the incoming gradient"
